"""matplotlib figures of the course, one module per topic."""
