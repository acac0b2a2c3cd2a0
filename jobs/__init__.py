"""Templates, jobs, job events and accounting records (built on accounts and clusters)."""
