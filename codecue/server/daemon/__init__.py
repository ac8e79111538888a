"""The per-user daemon and its transports: the daemon (:mod:`~codecue.server.daemon.service`), finding,
starting and stopping it (:mod:`~codecue.server.daemon.client`, no model imports), the stdio relay editors
spawn (:mod:`~codecue.server.daemon.relay`), and running a session over stdio, a Unix socket or loopback
TCP (:mod:`~codecue.server.daemon.streams`)."""
