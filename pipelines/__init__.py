"""Wiring: Dagster Definitions (assets, resources, jobs, sensors), the runner, the command line, and
freshness (what a method needs materialized before it runs)."""
