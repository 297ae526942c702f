"""Preference learning (DPO): settings, stages and the workflow (`preference_workflow`)."""
