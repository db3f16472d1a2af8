"""Wiring: Dagster Definitions (assets, resources, jobs, sensors) and the command line."""
