"""Reading Kafka: opening a generation at exact offsets, the reader thread, its FIFO and batches."""
