"""Probe: NVML energy counter vs power readings of each scope, under a steady matmul load."""
import threading, time, json, sys
import torch, pynvml as N
N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)
fields = {}
for name in ("NVML_FI_DEV_POWER_AVERAGE", "NVML_FI_DEV_POWER_INSTANT", "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
    if hasattr(N, name): fields[name] = getattr(N, name)
scopes = {"gpu": getattr(N, "NVML_POWER_SCOPE_GPU", 0), "module": getattr(N, "NVML_POWER_SCOPE_MODULE", 1), "memory": getattr(N, "NVML_POWER_SCOPE_MEMORY", 2)}
def read():
    t = time.monotonic(); row = {"t": t, "counter_mJ": N.nvmlDeviceGetTotalEnergyConsumption(h), "usage_mW": N.nvmlDeviceGetPowerUsage(h)}
    for fname, fid in fields.items():
        for sname, sid in scopes.items():
            try:
                v = N.nvmlDeviceGetFieldValues(h, [(fid, sid)])[0]
                row[f"{fname[12:]}_{sname}"] = (v.nvmlReturn, v.value.ullVal if fname.endswith("CONSUMPTION") else v.value.uiVal)
            except Exception as e:
                row[f"{fname[12:]}_{sname}"] = str(e)[:60]
    return row
print(json.dumps(read()))
stop = False; rows = []
def poll():
    while not stop:
        rows.append(read()); time.sleep(0.01)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16); b = torch.randn_like(a)
for duty in (1.0, 0.5):
    th = threading.Thread(target=poll); stop = False; rows.clear(); th.start()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 12:
        for _ in range(20): a @ b
        torch.cuda.synchronize()
        if duty < 1: time.sleep(0.004)
    stop = True; th.join()
    lo = [r for r in rows if r["t"] > rows[0]["t"] + 2]  # skip ramp
    T = lo[-1]["t"] - lo[0]["t"]; e = (lo[-1]["counter_mJ"] - lo[0]["counter_mJ"]) / 1e3
    out = {"duty": duty, "seconds": T, "counter_W": e / T, "usage_W": sum(r["usage_mW"] for r in lo) / len(lo) / 1e3}
    for k in lo[0]:
        if k.startswith(("POWER", "TOTAL")) and isinstance(lo[0][k], list | tuple) and lo[0][k][0] == 0:
            vals = [r[k][1] for r in lo if r[k][0] == 0]
            out[k] = (vals[-1] - vals[0]) / 1e3 / T if k.startswith("TOTAL") else sum(vals) / len(vals) / 1e3
        elif k.startswith(("POWER", "TOTAL")):
            out[k] = lo[0][k]
    print(json.dumps(out))
