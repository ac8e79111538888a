"""Model choice and loading, one straight line of frozen values.

:func:`~codecue.loading.resolve.resolve_config` finds and checks the configured models (a
:class:`~codecue.loading.resolve.ResolvedConfig`); :func:`~codecue.loading.plan.make_plan` prices the
runtimes present with the costs measured on this machine (a :class:`~codecue.loading.plan.Plan`);
:func:`~codecue.loading.load.planned_load` turns both into a :class:`~codecue.loading.load.LoadSpec`
(exactly the files and runtimes that serve); :func:`~codecue.loading.load.load_backends` loads it.
``codecue explain`` and ``codecue doctor`` show :func:`~codecue.loading.load.what_serves`, the same path
the model worker loads by. The K policy and the measured costs it reads are :mod:`codecue.tuning`.
"""
