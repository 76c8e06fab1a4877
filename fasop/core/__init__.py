"""Foundations every layer may use: the project's errors (`errors`), the ceilings on what fasop
accepts (`limits`), bounded get-or-make stores (`recent`) and process pools with fasop's signal
handling (`workers`).

May import: nothing of fasop but `fasop` itself (the version).
"""
