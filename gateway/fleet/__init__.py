"""Replicas of one fleet: who is alive, how messages reach a replica (Redis), and what
they say.

    messages.py   every message between replicas, the call core's and the legacy lane's:
                  frozen dataclasses, one codec, each kind versioned in
                  `gateway.protocol.formats` (sans-IO)
    port.py       `Bus`, the port the call core, tasks and the legacy lane are handed
    redis_bus.py  heartbeats, inboxes and reply lists on Redis (implements `Bus`); decodes
                  each inbox message once
    ledger.py     the upstream sessions each replica holds, for a dead one's sweep
    changes.py    list changes heard by one replica, told to the others
    single.py     a replica alone: the fleet of one (implements `Bus`), so nothing
                  outside the fleet asks whether there is one

The call core and the legacy lane may import `messages` and `port`, never the rest
(`tests/test_architecture.py`).
"""
