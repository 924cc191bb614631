"""Stand-ins for what the benchmark scripts' tests cannot have on a CPU-only machine.

``fake_flashinfer`` builds modules whose wrapper classes mirror the signatures of MetaX's
FlashInfer 0.2.6 port and of FlashInfer 0.6.1, computing through ``attention_reference``.
"""
