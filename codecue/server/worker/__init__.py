"""The model worker: one thread per process that owns the models and runs one job at a time
(:mod:`~codecue.server.worker.model_worker`), the models kept in a child process so that a crash in native
code costs one completion (:mod:`~codecue.server.worker.model_process`)."""
