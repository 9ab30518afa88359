"""Analysis of stored trials: statistics now, tables and reports later."""
