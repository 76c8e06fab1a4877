"""fasop: plan and price Transformer training on heterogeneous GPU clusters.

Flow (each module imports only from those before it):
specs -> plan -> enumerate -> compute, comm, partition, schedule, memory -> estimate -> search
-> report -> cli.
"""

__version__ = "0.1.0"
