//! Who may take a free exec slot (docs/behaviour.md §6.11). Pure: the controller's slots ask
//! [`may_take`] for each namespace that waits, and hand out slots in turn.
//!
//! A running hook cannot be interrupted, so a share cannot be taken back once it is held: the
//! rule can only decide who takes the slots that free up. Two things keep namespaces from holding
//! the slots other namespaces need, also when one team spreads its restore over several
//! namespaces:
//!
//! - **A reserve for newcomers.** The last [`SlotShare::reserve`] free slots go only to
//!   namespaces that hold none, so a namespace whose hooks arrive while others run hour-long hooks
//!   starts its first one at once.
//! - **A fair share.** A namespace that holds at least its share of the slots outside the
//!   reserve, among the namespaces that hold or wait for slots, takes no more while another
//!   waits: the slots that free up go to those below their share.

/// The slot budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotShare {
    /// `--max-concurrent-execs`: hooks running at once, cluster-wide.
    pub total: usize,
    /// `--max-concurrent-execs-per-namespace`: the most one namespace holds.
    pub per_namespace: usize,
    /// Free slots kept for namespaces that hold none: one eighth of `total` (2 of the default
    /// 16), at least 1 once there are 2 slots.
    pub reserve: usize,
}

impl SlotShare {
    /// The budget of `total` slots, at most `per_namespace` of them in one namespace.
    pub fn new(total: usize, per_namespace: usize) -> Self {
        let total = total.max(1);
        SlotShare {
            total,
            per_namespace: per_namespace.clamp(1, total),
            reserve: if total < 2 { 0 } else { (total / 8).max(1) },
        }
    }
}

/// Whether a namespace holding `held` slots may take a free one, while `in_use` slots are held
/// and `active` namespaces (this one among them) hold or wait for slots.
pub fn may_take(share: &SlotShare, held: usize, in_use: usize, active: usize) -> bool {
    let free = share.total.saturating_sub(in_use);
    if free == 0 || held >= share.per_namespace {
        return false;
    }
    if held == 0 {
        return true;
    }
    if free <= share.reserve {
        return false;
    }
    let fair = (share.total - share.reserve).div_ceil(active.max(1));
    held < fair
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_keeps_a_reserve_once_there_is_room_for_one() {
        let cases = [(1, 1, 0), (2, 1, 1), (16, 12, 2), (64, 48, 8)];
        for (total, per_namespace, reserve) in cases {
            let s = SlotShare::new(total, per_namespace);
            assert_eq!(s.reserve, reserve, "{total}");
        }
        assert_eq!(
            SlotShare::new(16, 99).per_namespace,
            16,
            "capped at the total"
        );
        assert_eq!(SlotShare::new(0, 0).total, 1);
    }

    /// Who may take a slot, with the default budget (16 slots, 12 per namespace, 2 reserved).
    #[test]
    fn newcomers_get_a_slot_and_nobody_grows_past_a_fair_share() {
        let s = SlotShare::new(16, 12);
        // (what, held by the namespace, held in all, namespaces holding or waiting, may take)
        let cases = [
            ("alone, the first", 0, 0, 1, true),
            (
                "alone, up to the slots outside the reserve",
                13,
                13,
                1,
                false,
            ),
            ("alone: its cap first", 12, 12, 1, false),
            ("alone, below its cap", 11, 11, 1, true),
            (
                "two namespaces hold 14: a third takes from the reserve",
                0,
                14,
                3,
                true,
            ),
            (
                "... but a fourth cannot once only the reserve is left",
                7,
                14,
                3,
                false,
            ),
            (
                "a namespace at its share waits while another is below it",
                7,
                10,
                2,
                false,
            ),
            ("below its share it takes one", 6, 10, 2, true),
            (
                "one team's two namespaces share like any two",
                5,
                10,
                3,
                false,
            ),
            (
                "a newcomer while every slot but the reserve is held",
                0,
                15,
                4,
                true,
            ),
            ("no slot free", 0, 16, 4, false),
        ];
        for (what, held, in_use, active, want) in cases {
            assert_eq!(may_take(&s, held, in_use, active), want, "{what}");
        }
    }
}
