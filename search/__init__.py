"""The search: Optuna over fusion decisions and kernel schedules, timed on the device within a budget.

``tune(model_or_graph, backend, budget_s)`` is the entry point (search/tuner.py); measure.py and
worker.py isolate candidates in worker processes; tasks.py and scheduler.py share the budget.
"""
