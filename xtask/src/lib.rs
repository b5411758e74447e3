//! Build helpers and the bench runner of ringreduce.

pub mod bench;
