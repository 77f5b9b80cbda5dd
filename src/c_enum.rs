//! `c_enum!`: a C enum's variants, values and names declared once.

/// Declares a C enum once: each variant with its value and its name, giving
/// the Rust enum, `ALL` and `name()`. The values must run 0, 1, 2, … in
/// declaration order (checked at compile time), so `ALL[v]` has the value
/// `v`.
macro_rules! c_enum {
    (
        $(#[$m:meta])*
        pub enum $T:ident: $repr:ty {
            $($(#[$vm:meta])* $V:ident = $val:literal, $name:literal;)*
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr($repr)]
        pub enum $T {
            $($(#[$vm])* $V = $val,)*
        }

        impl $T {
            /// Every variant, in value order (`ALL[v]` has the value `v`).
            pub const ALL: [$T; [$($val),*].len()] = [$($T::$V),*];

            /// Its name, as declared.
            pub const fn name(self) -> &'static str {
                match self {
                    $($T::$V => $name,)*
                }
            }
        }

        // The values are 0, 1, 2, … in order (what `ALL[v]` relies on).
        const _: () = {
            let mut v = 0;
            while v < $T::ALL.len() {
                assert!($T::ALL[v] as usize == v);
                v += 1;
            }
        };
    };
}
