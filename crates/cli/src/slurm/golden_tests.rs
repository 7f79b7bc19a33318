//! Golden tests of the Slurm renderers (exact text, trailing spaces included).
