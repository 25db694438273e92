"""`laminar-kafka`: the command line. The top floor: it imports the runtime and the dev tooling."""
