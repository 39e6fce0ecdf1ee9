"""Running test models on drivers: cases, variants, order, containment, comparison."""
