"""Talking to model providers, behind one interface (providers/base.py ``Provider``).

The job path asks ``providers.registry.provider_for(model)`` for a provider and calls it; only
this app imports a provider's SDK. Importing the package itself loads no SDK.
"""
