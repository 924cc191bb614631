from fi_attn_bench.history.cli import run_as_program

run_as_program()
