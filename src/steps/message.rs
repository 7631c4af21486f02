//! The engine's messages in a loop's inbox: a flow to start, a waiting
//! step completed, a root cancel, an awaited future woken.

use crate::args::{Args, Value};
use crate::error::{codes, Error};
use crate::steps::model::AsyncSteps;
use crate::steps::promise::Completion;
use crate::steps::scheduler::{FlowKey, Scheduler};
use crate::tool::Msg;
use std::sync::Arc;

/// A message for the engine of a loop, pushed from any thread.
pub(crate) enum FlowMsg {
    /// Start a flow (from a remote [`ToolHandle`](crate::ToolHandle)); the
    /// model (112 bytes) is boxed.
    Execute(Box<AsyncSteps>, Option<Arc<Completion>>),
    /// An external completion of a waiting step.
    Complete {
        flow: FlowKey,
        strand: u32,
        seq: u32,
        result: Result<Packed, Error>,
    },
    /// Root cancel.
    Cancel(FlowKey),
    /// A future awaited by a step was woken.
    Poll {
        flow: FlowKey,
        strand: u32,
        seq: u32,
    },
}

impl FlowMsg {
    /// As a message of the loop's inbox.
    #[inline]
    pub(crate) fn into_msg(self) -> Msg<Scheduler> {
        Msg::Engine(self)
    }

    /// Answers a message whose loop is gone: a flow waiting for a result
    /// gets `Canceled`; anything else is dropped.
    pub(crate) fn settle(self) {
        if let FlowMsg::Execute(_, Some(c)) = self {
            c.complete(Err(Error::with_info(
                codes::CANCELED,
                "the loop was stopped before the flow started",
            )));
        }
    }
}

/// Success [`Args`] in three words instead of twelve, for a message: no
/// value or one (the common case) inline, more in a box.
pub(crate) enum Packed {
    /// Only the first slot may hold a value.
    One(Option<Value>),
    /// Any other shape, as it was (gaps included).
    Many(Box<Args>),
}

impl Packed {
    /// Packs `a` (it unpacks to the same values in the same slots).
    #[inline]
    pub(crate) fn new(a: Args) -> Self {
        match a.into_one() {
            Ok(v) => Packed::One(v),
            Err(a) => Packed::Many(Box::new(a)),
        }
    }

    /// The args back.
    #[inline]
    pub(crate) fn unpack(self) -> Args {
        match self {
            Packed::One(v) => Args::one(v),
            Packed::Many(b) => *b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{FromArgs, IntoArgs};

    /// Not 144: the inbox stores messages in blocks of 63 that the
    /// producer allocates and zeroes, and every byte of a message crosses
    /// from the producer's core to the loop's.
    #[test]
    fn a_message_is_40_bytes() {
        assert!(std::mem::size_of::<Msg<Scheduler>>() <= 40);
    }

    #[test]
    fn packed_args_unpack_to_the_same_slots() {
        let types = |a: &Args| a.type_names();
        assert_eq!(types(&Packed::new(Args::new()).unpack()), "()");
        let mut one = Packed::new((7u32,).into_args()).unpack();
        assert_eq!(<(u32,)>::from_args(&mut one).unwrap(), (7,));
        let two = Packed::new((1u8, String::from("x")).into_args());
        assert!(matches!(two, Packed::Many(_)));
        assert_eq!(types(&two.unpack()), "(u8, String)");
        // `take` leaves no gap: the value left packs as one.
        let mut rest = (1u8, 2u16).into_args();
        let _ = rest.take(0);
        let rest = Packed::new(rest);
        assert!(matches!(rest, Packed::One(Some(Value::U16(2)))));
        assert_eq!(types(&rest.unpack()), "(u16,)");
    }
}
