"""How the nsqd benchmarks print a figure: the median of several runs, every run, and
nsqd's CPU seconds per million messages (steadier than rates on a shared machine)."""

import statistics


def figure(name: str, unit: str, rates: list[float], cpu_per_million: list[float], extra: str = "") -> str:
    runs = ", ".join(f"{r:,.0f}" for r in rates)
    cpus = ", ".join(f"{c:.2f}" for c in cpu_per_million)
    return (f"{name}: median {statistics.median(rates):,.0f} {unit} ({runs}); nsqd CPU s per million msgs: "
            f"median {statistics.median(cpu_per_million):.2f} ({cpus}){extra}")
