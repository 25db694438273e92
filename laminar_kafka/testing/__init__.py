"""`laminar_kafka.testing`: the project's test bed as a pytest plugin, for anyone's tests.

Installed with ``pip install 'laminar-kafka[testing]'``, pytest loads :mod:`.plugin` by itself
(entry point ``pytest11``). Its fixtures yield the handles of :mod:`.handles`; the servers are
started by :mod:`.servers`, records produced and read by :mod:`.records`, network faults made by
:mod:`.partition`; :mod:`.options` decides the backend. docs/testing.md is the guide.

Importing this package (or the plugin) imports no client library and starts nothing.
"""
from __future__ import annotations
