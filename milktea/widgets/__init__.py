"""ipywidgets views of the course, one module per topic; each is built on library functions."""
