//! The HTTP edge: one thin file per endpoint, each turning requests into calls of the
//! operations and their results into answers.

pub(crate) mod pay;
