"""In-process stand-ins behind the gateway's own ports: a manual clock, a scripted
legacy upstream, an in-memory fleet bus. Test modules import these; they are not tests."""
