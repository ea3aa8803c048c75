"""The watermark authority service (semantics section 4); the logic is in
``mwcore.watermarks``, this is its deployable entry point."""
