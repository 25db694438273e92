"""The node runtime: source generations, epochs, drain rounds and topology, under a coordinator."""
