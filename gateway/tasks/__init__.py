"""Long legacy calls served as tasks (the `io.modelcontextprotocol/tasks` extension).

    service.py  the front of it: which `tools/call` becomes a task (the tool's policy,
                the client's declaration), `tasks/get`, `tasks/update`, `tasks/cancel`
                on any replica, the caps, the records sealed at rest, a dead owner's
                tasks ended or carried on
    run.py      one task on the replica that owns it: its call driven through the
                bridge as an MRTR client would drive it (a round, its questions
                published, the answers sent back as a retry), its record rewritten at
                every change

A task is a view of a live call: the call core (`gateway.calls`) parks, resumes,
forwards and ends it as it does any call, and knows nothing of tasks. The task's
status table and wire shapes are the sans-IO `gateway.protocol.tasks`.
"""
