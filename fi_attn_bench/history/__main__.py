from fi_attn_bench.history.command_line import run_as_program

run_as_program()
