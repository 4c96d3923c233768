"""Command-line drivers (snow-opt, snow-run) and developer utilities."""
