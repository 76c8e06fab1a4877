"""What a plan is and which plans exist: `plan` (the frozen Plan: degrees, micro-batches, node
placement, layers per stage), `enumerate` (the valid degree combinations and placements of an
inventory) and `rowplan` (a plan read back from a results CSV row).

May import: fasop.core, fasop.specs.
"""
