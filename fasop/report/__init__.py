"""What a user takes away: results and Pareto CSV rows (`results`, `output`), `explain`, launch
arguments (`export`), figures (`plots`, the only module that imports matplotlib) and the
measured-run check (`validate`) and the fit of physical parameters to measured runs (`calibrate`).

May import: everything below it (fasop.core .. fasop.pareto).
"""
