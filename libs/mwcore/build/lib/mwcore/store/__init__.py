"""The checkpoint store: its interface, Redis and in-memory stores, checkpoint format, Lua scripts."""
