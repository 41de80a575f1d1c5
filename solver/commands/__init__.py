"""The commands around the search: solve/verify/analyze/sweep/export/calibrate CLIs, the report,
plots and the benchmark. The search itself (pipeline, heuristics, bounds, polish, verifier) lives
one level up in `solver/`."""
