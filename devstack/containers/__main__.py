"""Containers from the command line: ``python -m laminar_kafka.devstack.containers check|engine|build|list``.

Is there an engine and can it run a container, start podman's Docker API, build the project's images.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from laminar_kafka.devstack.containers.engine import ContainerError, check_container_runs, connect, is_podman
from laminar_kafka.devstack.containers.images import RECIPE_KEYS, ImageBuilder, image_status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laminar_kafka.devstack.containers", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="is there an engine, and can it run a container? (one line)")
    commands.add_parser("engine", help="start podman's Docker API when needed; print DOCKER_HOST=...")
    build = commands.add_parser("build", help="build every image (idempotent, cached)")
    build.add_argument("images", nargs="*", help="only these (and what they need): base java python "
                                                 "jvm-servers kafka zookeeper node seaweedfs rest-catalog")
    build.add_argument("--rebuild", action="store_true", help="ignore the cache")
    build.add_argument("--bases", choices=("auto", "debootstrap", "public"), default="auto",
                       help="base images by debootstrap (no registry) or pulled; auto: debootstrap when installed")
    commands.add_parser("list", help="the images and their ids")
    args = parser.parse_args(argv)
    try:
        client = connect()
        if args.command == "engine":
            print(f"DOCKER_HOST={os.environ['DOCKER_HOST']}")
            return 0
        check_container_runs(client)
        if args.command == "check":
            kind = "podman" if is_podman(client) else "docker"
            print(f"containers: ok ({kind} at {os.environ['DOCKER_HOST']} runs containers)")
            return 0
        if args.command == "list":
            for key, tag, state in image_status(client):
                print(f"{key:<12} {tag:<36} {state}")
            return 0
        unknown = sorted(set(args.images) - set(RECIPE_KEYS))
        if unknown:
            parser.error(f"unknown image {', '.join(unknown)}; choose from {' '.join(RECIPE_KEYS)}")
        started = time.monotonic()
        results = ImageBuilder(client, bases=args.bases, rebuild=args.rebuild).build(args.images or None)
        built = [r.key for r in results if not r.cached]
        print(f"images ready in {time.monotonic() - started:.1f} s (built: {', '.join(built) or 'nothing, all cached'})")
        return 0
    except ContainerError as exc:
        print(f"containers: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
