"""`laminar-kafka chaos`: a seeded chaos campaign over real processes, audited (a tool: top floor)."""
