"""Capacity forecasts fitted on the user's own runs: predict, then check.

A model (``model.json``) is fitted per server configuration — a profile as rendered on one
kind of hardware — from measured run folders: the time of a scheduler step from what it
holds, the KV cache the server really had, and the scheduler rules its profile implies. A
step-level replay of vLLM v1's scheduler then answers for workloads, rates and settings that
were never measured, as summaries with the keys a measured run's summary has.
"""
