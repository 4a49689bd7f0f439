//! Structs of counters that add up field by field (the figures of several cores, queues
//! or ports together).

/// Declares a struct of counters, as written, and its `add`, which adds another one's
/// counters to it field by field: a field added to the struct is in the sum, and cannot
/// be left out of it.
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident : $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $name {
            /// Adds `o`'s counters to these, field by field.
            pub fn add(&mut self, o: &$name) {
                $(self.$field += o.$field;)*
            }
        }
    };
}

pub(crate) use counters;

#[cfg(test)]
mod tests {
    counters! {
        #[derive(Debug, Default, PartialEq)]
        struct Two {
            pub a: u64,
            pub b: usize,
        }
    }

    #[test]
    fn add_sums_every_field() {
        let mut x = Two { a: 1, b: 2 };
        x.add(&Two { a: 10, b: 20 });
        assert_eq!(x, Two { a: 11, b: 22 });
    }
}
