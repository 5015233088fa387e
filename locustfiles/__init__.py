"""Locust user classes, traffic shapes and the record listener for LLM serving.

Run the shipped ``locustfile.py`` with plain ``locust -f``. Modules that need Locust import it
themselves; importing this package imports nothing heavy.
"""
