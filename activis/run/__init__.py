"""A training run on disk (the run record): see docs/run_record.md."""
