"""Exact low watermarks (semantics section 4): reports from interval owners and
injectors, the authority that turns them into each computation's input and output
watermark, and the compacted topic it publishes them on."""
