"""Network faults for one node process: namespaces, a TCP relay, partitions and slow links."""
