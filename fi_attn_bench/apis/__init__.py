"""The FlashInfer APIs the harness measures: one module each (its case grid, inputs, I/O and FLOP
formulas, reference, FlashInfer call and serving batches, declared as its ``SPEC``), listed
once in ``apis.registry``."""
