"""The chaos campaign's CDC pipeline (``laminar-kafka chaos --pipeline cdc``): Debezium change events
of a bounded key space (``producer``) upserted by the nodes into Iceberg tables, the kinds that act
on the upserts (``plan``: their events; ``faults``: their runner side), the audit against the final
state of every key (``model``: pure; ``audit``: the topic and the tables read), its table
(``report``), and what a pipeline changes in a run (``pipelines``)."""
