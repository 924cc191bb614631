"""What a maintainer reruns through public commands (summarizer speed, fuzzing, peaks, shard
balance, history detection): each file is a program, ``python benchmarks/NAME.py``; tests import
them as ``benchmarks.NAME``."""
