//! The unrolling the data loops and the flag waits share: a leaf, so that
//! the protocol (`flags`) does not depend on the data loop (`transfer`).

use crate::plan::UNROLL;

/// Expands `$body` once per unrolled slot `u = 0..8`, with constant `u`, so
/// that every value of a round stays in registers (an array indexed in a
/// loop would be placed in local memory).
macro_rules! unroll8 {
    ($u:ident => $body:expr) => {
        [
            {
                let $u = 0u64;
                $body
            },
            {
                let $u = 1u64;
                $body
            },
            {
                let $u = 2u64;
                $body
            },
            {
                let $u = 3u64;
                $body
            },
            {
                let $u = 4u64;
                $body
            },
            {
                let $u = 5u64;
                $body
            },
            {
                let $u = 6u64;
                $body
            },
            {
                let $u = 7u64;
                $body
            },
        ]
    };
}

pub(crate) use unroll8;

/// Runs `$body` once per slot `u = 0..4`, with constant `u`, for its effects:
/// the gradient layer's walks over four quads, so that the sixteen values
/// stay in registers (a loop over them went through local memory).
macro_rules! each4 {
    ($u:ident => $body:expr) => {{
        {
            let $u = 0usize;
            $body;
        }
        {
            let $u = 1usize;
            $body;
        }
        {
            let $u = 2usize;
            $body;
        }
        {
            let $u = 3usize;
            $body;
        }
    }};
}

pub(crate) use each4;

const _: () = assert!(UNROLL == 8, "unroll8! expands exactly UNROLL slots");
