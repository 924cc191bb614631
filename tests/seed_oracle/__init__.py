"""The seed's summarizer and result record, re-indented from the dump: a test oracle only."""
