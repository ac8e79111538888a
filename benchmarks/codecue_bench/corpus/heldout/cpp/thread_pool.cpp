// A fixed-size thread pool returning std::futures, with graceful shutdown and a parallel_for helper.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <future>
#include <iostream>
#include <mutex>
#include <numeric>
#include <queue>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

class ThreadPool {
public:
    explicit ThreadPool(std::size_t threads = std::thread::hardware_concurrency()) {
        if (threads == 0) {
            threads = 1;  // hardware_concurrency() may return 0 when it cannot tell
        }
        workers_.reserve(threads);
        for (std::size_t i = 0; i < threads; ++i) {
            workers_.emplace_back([this] { worker_loop(); });
        }
    }

    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    ~ThreadPool() { shutdown(); }

    template <typename F, typename... Args>
    auto submit(F&& f, Args&&... args) -> std::future<std::invoke_result_t<F, Args...>> {
        using Result = std::invoke_result_t<F, Args...>;
        auto task = std::make_shared<std::packaged_task<Result()>>(
            std::bind(std::forward<F>(f), std::forward<Args>(args)...));
        std::future<Result> future = task->get_future();
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (stopping_) {
                throw std::runtime_error("submit() on a pool that is shutting down");
            }
            tasks_.emplace([task] { (*task)(); });
        }
        ready_.notify_one();
        return future;
    }

    // Finishes queued tasks, then joins the workers. Safe to call more than once.
    void shutdown() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (stopping_) {
                return;
            }
            stopping_ = true;
        }
        ready_.notify_all();
        for (auto& worker : workers_) {
            if (worker.joinable()) {
                worker.join();
            }
        }
    }

    std::size_t size() const { return workers_.size(); }
    std::size_t completed() const { return completed_.load(std::memory_order_relaxed); }

private:
    void worker_loop() {
        for (;;) {
            std::function<void()> task;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
                if (stopping_ && tasks_.empty()) {
                    return;
                }
                task = std::move(tasks_.front());
                tasks_.pop();
            }
            task();  // exceptions are captured by packaged_task and rethrown from future::get()
            completed_.fetch_add(1, std::memory_order_relaxed);
        }
    }

    std::vector<std::thread> workers_;
    std::queue<std::function<void()>> tasks_;
    std::mutex mutex_;
    std::condition_variable ready_;
    bool stopping_ = false;
    std::atomic<std::size_t> completed_{0};
};

// Calls body(i) for i in [begin, end), split into one chunk per worker.
template <typename Body>
void parallel_for(ThreadPool& pool, std::size_t begin, std::size_t end, Body body) {
    if (begin >= end) {
        return;
    }
    const std::size_t chunks = std::min(pool.size(), end - begin);
    const std::size_t step = (end - begin + chunks - 1) / chunks;
    std::vector<std::future<void>> pending;
    for (std::size_t lo = begin; lo < end; lo += step) {
        const std::size_t hi = std::min(lo + step, end);
        pending.push_back(pool.submit([lo, hi, &body] {
            for (std::size_t i = lo; i < hi; ++i) {
                body(i);
            }
        }));
    }
    for (auto& f : pending) {
        f.get();
    }
}

int main() {
    ThreadPool pool(4);

    auto answer = pool.submit([](int a, int b) { return a * b; }, 6, 7);
    auto failing = pool.submit([]() -> int { throw std::invalid_argument("bad input"); });

    std::vector<double> squares(1000);
    parallel_for(pool, 0, squares.size(), [&squares](std::size_t i) {
        squares[i] = static_cast<double>(i) * static_cast<double>(i);
    });

    std::cout << "6 * 7 = " << answer.get() << '\n';
    try {
        failing.get();
    } catch (const std::exception& e) {
        std::cout << "task failed: " << e.what() << '\n';
    }
    std::cout << "sum of squares: " << std::accumulate(squares.begin(), squares.end(), 0.0) << '\n';
    pool.shutdown();
    std::cout << "tasks completed: " << pool.completed() << '\n';
    return 0;
}
