"""One process: settings read at the edge, logging, metrics, preflight checks, and wiring the parts."""
