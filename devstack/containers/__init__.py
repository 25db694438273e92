"""Containers: the engine, the project's images, server containers and the compose project."""
