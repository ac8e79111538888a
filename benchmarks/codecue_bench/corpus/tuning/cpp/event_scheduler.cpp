// A single-threaded event scheduler: callbacks run at simulated times in order, with
// cancellation handles and repeating timers. Useful for deterministic tests of timeout logic.

#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

using Millis = std::chrono::milliseconds;

class Scheduler {
public:
    using TimerId = std::uint64_t;
    using Callback = std::function<void(Scheduler&)>;

    TimerId schedule_after(Millis delay, Callback callback, Millis repeat = Millis::zero()) {
        if (delay < Millis::zero() || repeat < Millis::zero()) {
            throw std::invalid_argument("delays must not be negative");
        }
        const TimerId id = next_id_++;
        queue_.push(Event{now_ + delay, sequence_++, id, repeat, std::move(callback)});
        live_.insert(id);
        return id;
    }

    // Returns false if the timer already fired (and does not repeat) or was cancelled.
    bool cancel(TimerId id) { return live_.erase(id) > 0; }

    Millis now() const { return now_; }
    std::size_t pending() const { return live_.size(); }

    // Runs every event due at or before `until`, advancing the clock event by event.
    std::size_t run_until(Millis until) {
        std::size_t fired = 0;
        while (!queue_.empty() && queue_.top().due <= until) {
            Event event = queue_.top();
            queue_.pop();
            if (live_.count(event.id) == 0) {
                continue;  // cancelled: dropped lazily rather than searched for in the heap
            }
            now_ = event.due;
            if (event.repeat > Millis::zero()) {
                queue_.push(Event{now_ + event.repeat, sequence_++, event.id, event.repeat, event.callback});
            } else {
                live_.erase(event.id);
            }
            event.callback(*this);
            ++fired;
        }
        if (until > now_) {
            now_ = until;
        }
        return fired;
    }

    std::size_t run_for(Millis duration) { return run_until(now_ + duration); }

private:
    struct Event {
        Millis due;
        std::uint64_t sequence;  // ties run in scheduling order
        TimerId id;
        Millis repeat;
        Callback callback;
    };

    struct Later {
        bool operator()(const Event& a, const Event& b) const {
            return a.due != b.due ? a.due > b.due : a.sequence > b.sequence;
        }
    };

    std::priority_queue<Event, std::vector<Event>, Later> queue_;
    std::unordered_set<TimerId> live_;
    Millis now_{0};
    TimerId next_id_ = 1;
    std::uint64_t sequence_ = 0;
};

// A request with a deadline and a retry timer, driven entirely by the scheduler.
class RetryingRequest {
public:
    RetryingRequest(Scheduler& scheduler, std::string name, int max_attempts, Millis timeout)
        : scheduler_(scheduler), name_(std::move(name)), max_attempts_(max_attempts), timeout_(timeout) {}

    void start() {
        deadline_ = scheduler_.schedule_after(timeout_ * max_attempts_, [this](Scheduler& s) {
            s.cancel(retry_timer_);
            log("gave up after " + std::to_string(attempts_) + " attempts");
        });
        attempt();
    }

    void on_response() {
        scheduler_.cancel(retry_timer_);
        scheduler_.cancel(deadline_);
        log("succeeded on attempt " + std::to_string(attempts_));
    }

private:
    void attempt() {
        ++attempts_;
        log("attempt " + std::to_string(attempts_));
        if (attempts_ < max_attempts_) {
            retry_timer_ = scheduler_.schedule_after(timeout_, [this](Scheduler&) { attempt(); });
        }
    }

    void log(const std::string& message) const {
        std::cout << "[" << scheduler_.now().count() << " ms] " << name_ << ": " << message << '\n';
    }

    Scheduler& scheduler_;
    std::string name_;
    int max_attempts_;
    Millis timeout_;
    int attempts_ = 0;
    Scheduler::TimerId retry_timer_ = 0;
    Scheduler::TimerId deadline_ = 0;
};

int main() {
    using namespace std::chrono_literals;
    Scheduler scheduler;
    RetryingRequest fetch(scheduler, "fetch /config", 3, 250ms);
    RetryingRequest upload(scheduler, "upload report", 3, 400ms);
    fetch.start();
    upload.start();
    scheduler.schedule_after(600ms, [&upload](Scheduler&) { upload.on_response(); });
    scheduler.schedule_after(100ms, [](Scheduler& s) { std::cout << "heartbeat at " << s.now().count() << " ms\n"; }, 500ms);
    scheduler.run_for(2s);
    std::cout << scheduler.pending() << " timer(s) still pending\n";
    return 0;
}
