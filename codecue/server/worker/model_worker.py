"""The model worker: one thread that owns the models and runs one generation at a time.

Every LSP session (one per editor connection in the daemon) submits :class:`GenerationJob` s here. The
asyncio loops never touch a model, so they keep reading messages (and cancellations) while a
generation runs. A job is cancelled by setting its flag; the engine polls it between speculative
rounds, so a generation stops within one round (with the models in a child process, the cancel also
sets the process's shared flag, which the child reads before each round). The models are loaded on the
first job, swapped when a job asks for other models (:meth:`~codecue.models.config.CompletionConfig.load_key`:
a job's other decoding settings apply to that job on the models loaded), and unloaded after an idle timeout.
"""

from __future__ import annotations

import gc
import importlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from codecue.document import typed_since
from codecue.engine.fim import prompt_budget
from codecue.models.config import CompletionConfig
from codecue.request import JobKind, PreparedJob, RequestOptions, complete_job, warm_job
from codecue.server.worker.model_process import ModelProcessCrashed
from codecue.tuning import KPolicy
from codecue.tuning.policy import Depth

if TYPE_CHECKING:
    from codecue.completion import Completer
    from codecue.engine.results import GenerationResult
    from codecue.engine.rounds import RoundRecord
    from codecue.tuning.machine_costs import MachineCosts

log = logging.getLogger(__name__)

# Idle this long after a request, the worker starts what the request left for idle time (``when_idle``),
# by what comes first. The full prompt (the request may have used a shorter one to show text sooner):
# longer than a pause between keystrokes, since a keystroke arriving during it finds the short prompt's
# cache replaced, and waits for the step being evaluated.
REFINE_AFTER_S = 1.0
# The next line at a line's end, from what the cache holds: sooner, since a keystroke arriving during it
# waits for one round at most and finds its prompt still cached, and Enter joins it while it runs; long
# enough that keys typed in a row (a few a second) seldom start it. At once where the request had nothing
# to add to the line (_idle_wait).
NEXT_LINE_AFTER_S = 0.15


CompleterFactory = Callable[[CompletionConfig], "Completer"]


def load_completer(config: CompletionConfig) -> Completer:
    """The default factory: load the configured pair, or connect to the remote server with the pair as
    its fallback (heavy imports happen here, in the worker)."""
    if config.models.remote is not None:
        from codecue.remote_completion import RemoteCompleter

        local = replace(config, models=replace(config.models, remote=None))
        remote = RemoteCompleter.load(config.models.remote, tokenizer_model=config.models.target,
                                      budget=prompt_budget(config.decoding), local_factory=lambda: load_completer(local))
        return remote  # type: ignore[return-value]
    from codecue.loading.load import load_backends, plan_config, runtimes

    spec = plan_config(config)
    if runtimes(spec) != {"llamacpp"}:  # torch and exllamav2 import torch and transformers themselves
        from codecue.completion import Completer

        return Completer.from_spec(spec, config.decoding)
    # With llama.cpp alone, the engine's imports run beside the load (llama.cpp reads and re-lays the
    # weights in native code that lets go of the GIL); they hold no torch: llama.cpp's logits are numpy
    # arrays, and greedy decoding reads them as they are (codecue/engine/logits.py).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="codecue-imports") as pool:
        engine = pool.submit(importlib.import_module, "codecue.completion")
        loaded = load_backends(spec)
        completer_class = engine.result().Completer
    return completer_class.from_loaded(loaded, config.decoding)


@dataclass(eq=False)
class GenerationJob:
    """A prepared job (:func:`codecue.request.prepare`) on its way through the worker: the models it
    needs, how it runs beside other work, and who hears of it. Callbacks run on the worker thread."""

    config: CompletionConfig  # the models it needs, and how it decodes with them
    prepared: PreparedJob
    background: bool = False  # work ahead (warm-up, prefetch, next line): any real job cancels it
    #: a warm-up's time limit for the first part of the way: the window a request there sends first where
    #: the full prompt takes longer (Completer.warm_context); None warms the full prompt at once
    warm_within_ms: float | None = None
    #: a warm-up that leaves the cache as a fresh evaluation of the prompt would (Completer.warm), so that
    #: the place's next suggestion is what a fresh evaluation gives
    warm_fresh: bool = False
    #: what idle time after this request prepares (background jobs chained by ``then``): the place's full
    #: prompt, the next line at a line's end (the server's ``workAhead`` option)
    when_idle: GenerationJob | None = None
    #: what runs after this job when it got through (the rest's next step); a request cancels it
    then: GenerationJob | None = None
    on_round: Callable[[RoundRecord], None] | None = None
    on_text: Callable[[str], None] | None = None
    label: str = ""  # for logs
    future: Future[GenerationResult | None] = field(default_factory=Future)
    rounds_started: int = 0
    rounds_at_cancel: int | None = None
    #: a warm-up's outcome, set when it ran: prompt tokens the target evaluated (what its cache lacked)
    #: and whether it got through (the whole prompt; for a generation, to its stop; False: cancelled)
    warmed_tokens: int | None = None
    warm_complete: bool = False
    _cancel: threading.Event = field(default_factory=threading.Event)
    _interrupt: threading.Event = field(default_factory=threading.Event)  # ... and a call under way stops too
    _on_cancel: list[Callable[..., None]] = field(default_factory=list, init=False, repr=False)

    @property
    def kind(self) -> JobKind:
        return self.prepared.kind

    def cancel(self, *, finish_call: bool = False) -> None:
        """Stop the job. ``finish_call``: a warm-up's evaluation call under way runs to its end first (the
        request that cancels it needs what the call evaluates; stopped part-way, the call's work is lost),
        and no next step starts. A later cancel without it still stops the call."""
        first, interrupt = not self._cancel.is_set(), not finish_call and not self._interrupt.is_set()
        if first:
            self.rounds_at_cancel = self.rounds_started
            self._cancel.set()
        if interrupt:
            self._interrupt.set()
        if first or interrupt:
            for notify in list(self._on_cancel):
                notify(finish_call=not interrupt)

    def when_cancelled(self, notify: Callable[..., None]) -> None:
        """Call ``notify(finish_call=...)`` (on the cancelling thread) when the job is cancelled (see
        :meth:`cancel`), or now if it is: a model process does not poll the job, it is told."""
        self._on_cancel.append(notify)
        if self._cancel.is_set():
            notify(finish_call=not self._interrupt.is_set())

    @property
    def is_cancelled(self) -> bool:
        return self._cancel.is_set()

    def poll_cancelled(self) -> bool:
        """The engine's ``cancelled`` callback: called once before each round (by a model process as each
        round's notice arrives); a warm-up asks it between its steps (the rounds counted then are not
        read)."""
        if self._cancel.is_set():
            return True
        self.rounds_started += 1
        return False

    def poll_interrupted(self) -> bool:
        """A warm-up's check within a call, where calls stop part-way: cancelled, and not left to finish
        the call (:meth:`cancel`)."""
        return self._interrupt.is_set()

    def rounds_after_cancel(self, rounds_completed: int) -> int:
        """Rounds that finished after :meth:`cancel` was called: at most the one in progress then (an upper
        bound: a round that ended just before the call counts too)."""
        if self.rounds_at_cancel is None:
            return 0
        return max(0, rounds_completed - max(0, self.rounds_at_cancel - 1))


class ModelWorker:
    """The thread that owns the models. Thread-safe: ``submit`` may be called from any thread."""

    def __init__(
        self,
        default_config: CompletionConfig | None = None,
        factory: CompleterFactory = load_completer,
        idle_unload_s: float | None = 900.0,
        reuse_cache: bool = True,
        max_pending: int = 8,
        measure_costs: bool = True,
        k_policy: KPolicy | None = None,
        load_at_connect: bool = True,
    ) -> None:
        self.default_config = default_config or CompletionConfig()
        self.load_at_connect = load_at_connect  # :meth:`preload` loads; False: the first request does
        self.factory = factory
        self.idle_unload_s = idle_unload_s if idle_unload_s and idle_unload_s > 0 else None
        self.reuse_cache = reuse_cache
        self.max_pending = max_pending
        #: measure this machine's costs for a newly loaded pair in idle time (when none are cached)
        self.measure_costs = measure_costs
        self.machine_costs: MachineCosts | None = None
        self._k_policy = k_policy
        self._k_policy_failed = False
        self._k_policy_lock = threading.Lock()
        self._costs_ready = True
        self._served_since_load = False  # a request (not a load at connect) has run on the loaded models
        self._queue: deque[GenerationJob] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._completer: Completer | None = None
        self._loaded: CompletionConfig | None = None  # the configuration the models were loaded for
        self._running: GenerationJob | None = None
        self._when_idle: GenerationJob | None = None  # what the last request left for idle time
        self._when_idle_after = REFINE_AFTER_S  # ... and how long idle time must last before it starts
        self._interrupt_idle_work: Callable[[], None] | None = None  # cancels a measurement in a model process
        self.last_activity = time.monotonic()
        self.generations = 0  # completions (a request's, or one prefetched after an accept)
        self.next_lines = 0  # next lines prepared in a rest (JobKind.NEXT_LINE)
        self.loads = 0
        self.unloads = 0

    # -- public --------------------------------------------------------------------------------------
    def submit(self, job: GenerationJob) -> Future[GenerationResult | None]:
        with self._cond:
            if self._stopping:
                job.future.set_exception(RuntimeError("the model worker is shutting down"))
                return job.future
            if not job.background:
                # Work that only prepares the future never delays a request: drop it. A warm-up of the
                # window the request extends finishes the call under way: the request needs what it evaluates.
                self._cancel_background_locked(finishing=job)
                self._when_idle = None
            else:
                # Work ahead for where the editor is now (a warm-up, the suggestion after an accepted one):
                # an older warm-up (the last request's place, an earlier cursor position) would only delay
                # it, or evict what it evaluates; a request may already wait for a prefetch.
                self._cancel_background_locked(only=(JobKind.WARM, JobKind.NEXT_LINE))
                self._when_idle = None
            self._queue.append(job)
            if self._interrupt_idle_work is not None:
                self._interrupt_idle_work()
            # A flood of requests (many documents at once) must not grow the queue without bound: the
            # oldest waiting jobs are the least likely to still matter.
            while len(self._queue) > self.max_pending:
                dropped = self._queue.popleft()
                dropped.cancel()
                dropped.future.set_result(None)
            self.last_activity = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="codecue-model-worker", daemon=True)
                self._thread.start()
            self._cond.notify()
        return job.future

    def rest_at(self, chain: GenerationJob, shown: str) -> None:
        """Idle work for a place a request was answered at without a job (typed through a finished
        suggestion that showed ``shown``): ``chain`` replaces what the last job left for idle time (an
        earlier place's) and the warm-up or next line running for it; idle time counts from now."""
        with self._cond:
            if self._stopping or any(not waiting.background for waiting in self._queue):
                return
            self._cancel_background_locked(only=(JobKind.WARM, JobKind.NEXT_LINE))
            self._leave_for_idle_locked(chain, shown)
            self.last_activity = time.monotonic()
            self._cond.notify()

    def _leave_for_idle_locked(self, chain: GenerationJob, shown: str) -> None:
        """``chain`` is what idle time runs next, after a suggestion that showed ``shown`` (:func:`_idle_wait`)."""
        self._when_idle = chain
        self._when_idle_after = _idle_wait(chain, shown)

    def preload(self, config: CompletionConfig) -> None:
        """Load ``config``'s models in the background unless they are loaded: an editor that just connected
        asks for a completion soon, and loading is most of a cold start. A request that comes meanwhile
        waits for the load to finish (a load is not cut short), not for anything after it."""
        if not self.load_at_connect or self.holds(config):
            return
        self.submit(GenerationJob(config, loading_job(), background=True, label="load at connect"))

    def _cancel_background_locked(self, only: tuple[JobKind, ...] | None = None,
                                  finishing: GenerationJob | None = None) -> None:
        """Drop the queued background jobs and cancel the running one (with ``only``: those of these kinds).
        ``finishing``: a request for which a running warm-up it extends finishes its call (:func:`extends_warm_up`)."""
        def dropped(job: GenerationJob) -> bool:
            return job.background and (only is None or job.kind in only)

        for waiting in [j for j in self._queue if dropped(j)]:
            self._queue.remove(waiting)
            waiting.cancel()
            waiting.future.set_result(None)
        running = self._running
        if running is not None and dropped(running):
            running.cancel(finish_call=finishing is not None and extends_warm_up(finishing, running))

    def will_hold(self, config: CompletionConfig) -> bool:
        """Whether ``config``'s models are loaded, or being loaded (an editor that just connected): work
        ahead for them may queue behind the load."""
        if self.holds(config):
            return True
        with self._cond:
            jobs = [self._running, *self._queue]
            return any(job is not None and job.kind is JobKind.LOAD and not job.is_cancelled
                       and job.config.load_key() == config.load_key() for job in jobs)

    def is_running(self, job: GenerationJob) -> bool:
        """Whether ``job`` is the one the worker runs now."""
        return self._running is job

    @property
    def loaded(self) -> CompletionConfig | None:
        return self._loaded

    def holds(self, config: CompletionConfig) -> bool:
        """Whether the models ``config`` needs are loaded (its decoding settings may differ)."""
        loaded = self._loaded
        return self._completer is not None and loaded is not None and loaded.load_key() == config.load_key()

    @property
    def completer(self) -> Completer | None:
        return self._completer

    @property
    def k_policy(self) -> KPolicy | None:
        """The K authority every session on this worker shares (it learns across them): the one given, else
        one from the user's profile, loaded on first use and priced when models load; None when the profile
        cannot be loaded (said once)."""
        with self._k_policy_lock:
            if self._k_policy is None and not self._k_policy_failed:
                try:
                    self._k_policy = KPolicy.load()
                except Exception as exc:  # noqa: BLE001 - completions go on with the configured K
                    self._k_policy_failed = True
                    log.warning("K policy disabled: %s", exc)
            return self._k_policy

    def depth_for(self, job: GenerationJob) -> Depth:
        """The job's draft depth: fixed by its decoding settings, else the K authority's for the pair now
        loaded; K = 0 without an authority (a profile that cannot be read)."""
        requested = job.config.decoding.k
        policy = self.k_policy
        if policy is None:
            k = requested or 0
            return Depth(k, k, "fixed by the configuration" if k else "no K policy")
        return policy.depth_for(job.prepared.language, job.prepared.context_class, requested=requested)

    def drafts(self, job: GenerationJob) -> bool:
        """Whether a request like ``job`` may draft: K fixed above 0 by its decoding settings, else a K
        authority whose ceiling is above 0 for the pair loaded (where it is 0, speculation cannot pay on
        the costs measured here, or none are measured, and no request reads the draft's cache)."""
        requested = job.config.decoding.k
        if requested is not None:
            return requested > 0
        policy = self.k_policy
        return policy is not None and policy.ceiling() > 0

    def save_learned_k(self) -> bool:
        """Keep what the K policy learned (per-class acceptance, K) in the user's profile, so that the next
        server starts from it. Atomic; a failure is logged, never raised. True when a profile was written."""
        policy = self._k_policy
        if policy is None or not policy.unsaved_rounds:
            return False
        try:
            policy.save()
        except Exception as exc:  # noqa: BLE001 - losing the learned profile must not take the server down
            log.warning("could not save the learned K profile: %s", exc)
            return False
        return True

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {
                "modelsLoaded": self._completer is not None,
                "model": self._loaded.to_json() if self._loaded else None,
                "defaultModel": self.default_config.to_json(),
                "busy": self._running is not None,
                "pending": len(self._queue),
                "generations": self.generations,
                "nextLines": self.next_lines,
                "loads": self.loads,
                "unloads": self.unloads,
                "idleSeconds": round(time.monotonic() - self.last_activity, 1),
                "idleUnloadSeconds": self.idle_unload_s,
            }

    def unload(self) -> None:
        """Drop the models (the next job loads them again)."""
        with self._cond:
            self._unload_locked()

    def shutdown(self, timeout: float = 10.0, unload: bool = True) -> None:
        """Stop the thread (cancelling what is queued or running) and, unless told not to, unload."""
        with self._cond:
            self._stopping = True
            for job in self._queue:
                job.cancel()
                job.future.set_result(None)
            self._queue.clear()
            if self._running is not None:
                self._running.cancel()
            if self._interrupt_idle_work is not None:
                self._interrupt_idle_work()
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if unload:
            with self._cond:
                self._unload_locked()
        close_factory = getattr(self.factory, "close", None)  # a started model process nothing loaded
        if close_factory is not None:
            close_factory()

    # -- the thread ----------------------------------------------------------------------------------
    def _unload_locked(self) -> None:
        if self._completer is None:
            return
        completer, self._completer, self._loaded = self._completer, None, None
        try:
            completer.close()
        except Exception:  # noqa: BLE001 - unloading must not take the worker down
            log.exception("closing the models failed")
        del completer
        gc.collect()
        self.unloads += 1
        log.info("models unloaded")
        self.save_learned_k()  # on idle unload and at shutdown

    def _next_job(self) -> GenerationJob | None:
        with self._cond:
            while not self._queue and not self._stopping:
                timeout = None
                if self.idle_unload_s is not None and self._completer is not None:
                    timeout = self.last_activity + self.idle_unload_s - time.monotonic()
                    if timeout <= 0:
                        log.info("idle for %.0f s", self.idle_unload_s)
                        self._unload_locked()
                        continue
                if self._when_idle is not None and self._completer is not None:
                    wait = self.last_activity + self._when_idle_after - time.monotonic()
                    if wait <= 0:
                        job, self._when_idle = self._when_idle, None
                        self._running = job
                        return job
                    timeout = wait if timeout is None else min(timeout, wait)
                self._cond.wait(timeout)
            if self._stopping:
                return None
            job = next((j for j in self._queue if not j.background), self._queue[0])
            self._queue.remove(job)
            self._running = job
            return job

    def _ensure_loaded(self, config: CompletionConfig) -> Completer:
        if self._completer is not None and self.holds(config):
            return self._completer
        with self._cond:
            self._unload_locked()
        log.info("loading models %s", config)
        t0 = time.perf_counter()
        completer = self.factory(config)
        log.info("models loaded in %.1f s", time.perf_counter() - t0)
        policy = self.k_policy
        if policy is not None:  # K from the costs measured here for exactly what is now served
            try:
                target, draft = completer.names
                policy.serve(completer.runtime, target, draft, draft_model=draft is not None)
            except Exception as exc:  # noqa: BLE001
                log.warning("K policy: could not price runtime %s: %s", completer.runtime, exc)
        with self._cond:
            self._completer, self._loaded = completer, config
            self._costs_ready = False
            self._served_since_load = False
            self.loads += 1
        return completer

    def _costs_when_idle(self) -> None:
        """Once per loaded pair: this machine's costs for it, from the cache or measured now. Runs only with
        no job waiting, and gives way to the next job between timed passes (then it is tried again later)."""
        completer = self._completer
        if completer is None or self._costs_ready or self._queue or self._stopping or not self._served_since_load:
            return  # (a load at connect is followed by the editor's first request: measuring would delay it)
        from codecue.tuning.machine_costs import (
            MeasurementAbandoned,
            load_machine_costs,
            store_machine_costs,
        )

        measured = load_machine_costs(completer.runtime, *completer.names)
        if measured is None and self.measure_costs:
            log.info("measuring this machine's costs for %s in idle time", completer.runtime)
            # A model process is told to stop at once when a job arrives (``submit``); should_stop is
            # what an in-process completer asks between timed passes.
            canceller = getattr(completer, "canceller", None)
            with self._cond:
                self._interrupt_idle_work = canceller() if canceller is not None else None
            try:
                measured = completer.measure_costs(should_stop=lambda: bool(self._queue) or self._stopping)
            except MeasurementAbandoned:
                return
            except Exception as exc:  # noqa: BLE001 - costs are an optimisation; serving goes on without
                log.warning("measuring costs failed: %s", exc, exc_info=not isinstance(exc, ModelProcessCrashed))
                if isinstance(exc, ModelProcessCrashed):
                    with self._cond:
                        self._unload_locked()
                self._costs_ready = True
                return
            finally:
                with self._cond:
                    self._interrupt_idle_work = None
            if measured is None:  # a remote server: nothing of ours to measure
                self._costs_ready = True
                return
            store_machine_costs(measured, *completer.names)
            log.info("measured %s: target step %.1f ms, prefill %.2f ms/token", measured.runtime,
                     measured.target_step_ms, measured.prefill_ms_per_token)
        self._costs_ready = True
        self.machine_costs = measured
        policy = self.k_policy
        if policy is not None and measured is not None and measured.costs is not None:
            policy.use_costs(measured.costs, runtime=measured.runtime)

    def _follow(self, job: GenerationJob) -> None:
        """After a job that got through: queue what it prepares the way for (``then``), unless a request
        waits or came meanwhile."""
        follower = job.then
        if follower is None:
            return
        with self._cond:
            if (not job.warm_complete or self._stopping or follower.is_cancelled
                    or any(not waiting.background for waiting in self._queue)):
                follower.cancel()
                follower.future.set_result(None)
                return
            self._queue.append(follower)

    def _run(self) -> None:
        while True:
            self._costs_when_idle()
            job = self._next_job()
            if job is None:
                return
            started = time.perf_counter()
            try:
                if job.is_cancelled:
                    job.future.set_result(None)
                    continue
                completer = self._ensure_loaded(job.config)
                if job.is_cancelled or job.kind is JobKind.LOAD:  # cancelled while the models loaded, or only to load
                    job.future.set_result(None)
                    continue
                self._served_since_load = True
                if not self.reuse_cache:
                    completer.reset_caches()
                decoding = job.config.decoding
                if job.kind is JobKind.WARM:
                    _link_cancel(job, completer)
                    job.warmed_tokens = warm_job(completer, job.prepared, decoding=decoding,
                                                 cancelled=job.poll_cancelled, interrupted=job.poll_interrupted,
                                                 within_ms=job.warm_within_ms,
                                                 fresh=job.warm_fresh, with_draft=self.drafts(job))
                    job.warm_complete = not job.is_cancelled
                    job.future.set_result(None)
                    self._follow(job)
                    continue
                depth = self.depth_for(job)
                _link_cancel(job, completer)
                result = complete_job(completer, job.prepared, decoding=decoding, k=depth.start, k_max=depth.ceiling,
                                      on_text=job.on_text, cancelled=job.poll_cancelled, on_round=job.on_round)
                if job.kind is JobKind.NEXT_LINE:
                    self.next_lines += 1
                else:
                    self.generations += 1
                if not job.background and job.when_idle is not None:
                    # Before the answer goes out: a warm-up the editor asks for after it (the cursor moved
                    # on) must find this to drop. One already waiting is for a newer place.
                    with self._cond:
                        if not any(waiting.kind is JobKind.WARM for waiting in self._queue):
                            self._leave_for_idle_locked(job.when_idle, result.text)
                job.future.set_result(result)
                job.warm_complete = result.stop_reason != "cancelled"
                self._follow(job)
            except BaseException as exc:  # noqa: BLE001 - the job's owner reports it; the worker lives on
                if isinstance(exc, ModelProcessCrashed):
                    with self._cond:  # the next job starts a new model process
                        self._unload_locked()
                log.warning("generation %s failed: %s", job.label, exc, exc_info=not _is_user_error(exc))
                if not job.future.done():
                    job.future.set_exception(exc)
            finally:
                log.debug("%s %s: %.0f ms%s", job.kind.value, job.label, (time.perf_counter() - started) * 1e3,
                          " (cancelled)" if job.is_cancelled else "")
                close_rounds = getattr(job.on_round, "close", None)  # a RoundJoiner holds the last run open
                if close_rounds is not None:
                    close_rounds()
                with self._cond:
                    self._running = None
                    self.last_activity = time.monotonic()


def _idle_wait(follow: GenerationJob, shown: str) -> float:
    """How long idle time must last before ``follow`` starts, after a request that showed ``shown``: the full
    prompt waits :data:`REFINE_AFTER_S`; the next line :data:`NEXT_LINE_AFTER_S`, or nothing where the
    model had nothing to add to the line (it holds the line complete: Enter is likely next)."""
    if follow.kind is not JobKind.NEXT_LINE:
        return REFINE_AFTER_S
    return 0.0 if not shown.strip() else NEXT_LINE_AFTER_S


def loading_job() -> PreparedJob:
    """A job that only loads the models."""
    return PreparedJob(JobKind.LOAD, "", "", (), None, RequestOptions(), "", None, None)


def extends_warm_up(request: GenerationJob, warm_up: GenerationJob) -> bool:
    """Whether ``request`` is at the place ``warm_up`` warms a window for, or typed on from it (the same
    document, its text before the cursor grown by what was typed, the text after it the same): its prompt
    then starts with what the warm-up evaluates. Not a fresh evaluation's (a rest's full prompt), which a
    request there does not wait for: it loads the cache that holds its window back."""
    if warm_up.kind is not JobKind.WARM or warm_up.warm_fresh or not request.kind.generates:
        return False
    place, at = warm_up.prepared, request.prepared
    return place.path == at.path and typed_since(place.prefix, place.suffix, at.prefix, at.suffix) is not None


def _link_cancel(job: GenerationJob, completer: Completer) -> None:
    """Right before the completer's call for ``job``: a model process (which has ``canceller``) learns of
    the job's cancel through its shared flag at once, not when it next reports a round."""
    canceller = getattr(completer, "canceller", None)
    if canceller is not None:
        job.when_cancelled(canceller())


def _is_user_error(exc: BaseException) -> bool:
    from codecue.errors import CodeCueError

    return isinstance(exc, CodeCueError)
