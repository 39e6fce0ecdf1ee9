"""The suite's file formats, below everything that reads or writes them."""
