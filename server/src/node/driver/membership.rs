//! The driver's side of membership changes: asking the Node for a change, answering it once
//! the log chose it, and keeping the transport, the leader hints and the inbound member set in
//! step with every membership the log scheduled.

use super::*;

impl<D: Disk + Clone + 'static, C: Clock> Driver<D, C> {
    pub(super) fn on_change_membership(
        &mut self,
        now: Instant,
        request: ChangeRequest,
        reply: Responder<MembershipChanged>,
    ) {
        if self.membership_wait.is_some() {
            let pending = ReconfigError::NotChosen("the change asked before".to_owned());
            let _ = reply.send(Err(self.reconfig_error(&pending)));
            return;
        }
        if self.node.role() != RoleKind::Leader {
            let not_leader = ReconfigError::NotLeader {
                leader_hint: self.node.leader(),
            };
            let _ = reply.send(Err(self.reconfig_error(&not_leader)));
            return;
        }
        let replica = self.node.replica();
        let about = match &request.change {
            MemberChange::Add(a) => a.id,
            MemberChange::Promote(id) | MemberChange::Remove(id) => *id,
        };
        let known = Known {
            latest: replica.membership_latest().0,
            applied: replica.slot_applied(),
            member_applied: replica.peer_applied(about),
        };
        let next = match next_membership(&known, &request) {
            Ok(Next::Propose(next)) => *next,
            Ok(Next::AlreadySo) => {
                let (membership, from_slot) = replica.membership_latest();
                tracing::info!(node = %self.handle.id, change = ?request.change,
                    actor = %request.actor, %membership,
                    "membership change asked again: already so, nothing proposed");
                let _ = reply.send(Ok(MembershipChanged {
                    membership: membership.clone(),
                    from_slot,
                }));
                return;
            }
            Err(status) => {
                let _ = reply.send(Err(status));
                return;
            }
        };
        // The stamp gives the change its time in the audit trail (and a revision of its own):
        // from cluster version 2 (a replica of release 0.1 would apply it without one).
        let stamped = self.node.state().cluster_version() >= 2;
        let next = Membership {
            stamp: stamped.then_some(now),
            ..next
        };
        tracing::info!(node = %self.handle.id, change = ?request.change, actor = %request.actor,
            reason = %request.reason, force = request.force, to = %next,
            "membership change proposed");
        match self
            .node
            .change_membership(now, next.clone(), request.force)
        {
            Ok(()) => self.membership_wait = Some((next, reply)),
            Err(error) => {
                let _ = reply.send(Err(self.reconfig_error(&error)));
            }
        }
    }

    pub(super) fn reconfig_error(&self, error: &ReconfigError) -> Refusal {
        Refusal::reconfig(error.clone(), |n| self.handle.endpoint_of(n))
    }

    /// After applies: answers the change the log chose and keeps the transport and the leader
    /// hints in step with every membership the log scheduled.
    pub(super) fn sync_members(&mut self) {
        let schedule = self.node.replica().schedule();
        if let Some((target, _)) = &self.membership_wait {
            let chosen = schedule.entries().iter().find(|(_, m)| m == target);
            if let Some((from_slot, membership)) = chosen.cloned() {
                let (_, reply) = self.membership_wait.take().expect("just seen");
                tracing::info!(node = %self.handle.id, %membership, from_slot = from_slot.0,
                    "membership change chosen");
                let _ = reply.send(Ok(MembershipChanged {
                    membership,
                    from_slot,
                }));
            } else if self.node.role() != RoleKind::Leader {
                let (_, reply) = self.membership_wait.take().expect("just seen");
                let _ = reply.send(Err(Refusal::ChangeOutcomeUnknown));
            }
        }
        let replica = self.node.replica();
        let guessed = replica.membership_guessed();
        let applied = replica.slot_applied();
        let governing_from = schedule
            .entries()
            .iter()
            .rev()
            .find(|(from, _)| *from <= applied.next())
            .map_or(paxos::Slot(1), |(from, _)| *from);
        if self
            .schedule_seen
            .as_ref()
            .is_some_and(|(s, g, f)| s == schedule && *g == guessed && *f == governing_from)
        {
            return;
        }
        let schedule = schedule.clone();
        let me = self.handle.id;
        let was_guessed = self.schedule_seen.as_ref().is_some_and(|(_, g, _)| *g);
        let first_before = self
            .schedule_seen
            .as_ref()
            .map(|(s, _, _)| s.entries()[0].clone());
        if was_guessed && !guessed {
            tracing::info!(node = %me, membership = %schedule.entries()[0].1,
                newest = %schedule.last(), from_slot = schedule.last_from().0,
                "learned the cluster's membership from a peer (the config file's members were \
                 only whom to contact)");
        } else if first_before.is_some_and(|(from, first)| {
            let (now_from, now) = &schedule.entries()[0];
            from == paxos::Slot(1) && *now_from == from && *now != first
        }) {
            // A replica back with --rejoin knew the voters, not the version the log starts at.
            let first = &schedule.entries()[0].1;
            tracing::info!(node = %me, membership = %first,
                cluster_version = first.cluster_version,
                "learned the cluster's first membership from a peer, with the cluster version \
                 its log starts at");
        }
        let Some(dialer) = &mut self.dialer else {
            // Tests without a transport: the members are whom `peers_out` reaches.
            let mut known: BTreeSet<NodeId> = self.configured.clone();
            for (_, m) in schedule.entries() {
                known.extend(m.members());
            }
            if let Some(set) = &self.member_set {
                set.replace(known);
            }
            self.schedule_seen = Some((schedule, guessed, governing_from));
            return;
        };
        // Exactly the members of the memberships that govern the slots from the next one to
        // apply on; while the first membership is a guess, the contacts too (whom to learn from).
        let mut known: BTreeSet<NodeId> = BTreeSet::from([me]);
        // The planted bug `Faults::peers_from_file` (picketd never sets it).
        let planted = self.node.replica().config().faults.peers_from_file;
        if planted {
            // The planted bug (the code before issue 34): every id of the log and the file
            // is accepted, but only the file's members and those a change added are dialed.
            known.extend(dialer.contacts().keys().copied());
            for (_, m) in schedule.entries() {
                known.extend(m.members());
            }
        }
        for (from, m) in schedule.entries() {
            if planted {
                break;
            }
            let governs_later = schedule
                .entries()
                .iter()
                .find(|(f, _)| f > from)
                .is_none_or(|(next, _)| *next > applied.next());
            if governs_later {
                known.extend(m.members());
            }
        }
        if guessed {
            known.extend(dialer.contacts().keys().copied());
        }
        for &id in &known {
            if id == me {
                continue;
            }
            let added = schedule.entries().iter().any(|(_, m)| m.is_learner(id))
                || !schedule.entries()[0].1.is_voter(id);
            if planted && !dialer.contacts().contains_key(&id) && !added {
                continue;
            }
            // The newest address the log gives; else the config file's (a membership written
            // before every member's address was recorded).
            let address = schedule
                .entries()
                .iter()
                .rev()
                .find_map(|(_, m)| m.address_of(id).cloned())
                .or_else(|| dialer.contacts().get(&id).cloned());
            let Some(address) = address else {
                tracing::warn!(node = %me, peer = %id,
                    "no address known for a member (not in the log, not in the config file): \
                     it is not dialed");
                continue;
            };
            if let std::collections::btree_map::Entry::Vacant(queue) = self.peers_out.entry(id) {
                tracing::info!(node = %me, peer = %id, address = %address.peer,
                    "connecting to a member");
                queue.insert(dialer.dial(&address));
            }
            let endpoint = dialer.endpoint(&address);
            self.handle
                .endpoints
                .write()
                .expect("endpoints poisoned")
                .insert(id, endpoint);
            if let Some(http) = dialer.http_endpoint(&address) {
                self.handle.http_endpoints.insert(id.0, http);
            }
        }
        // Members no membership in effect names any more: their connections end when their
        // queues are dropped.
        self.peers_out.retain(|id, _| {
            let keep = known.contains(id);
            if !keep {
                tracing::info!(node = %me, peer = %id, "no longer a member: disconnecting");
            }
            keep
        });
        if let Some(set) = &self.member_set {
            set.replace(known);
        }
        self.schedule_seen = Some((schedule, guessed, governing_from));
        self.update_view();
    }

    /// Once per start: this replica was removed from the membership (its log or a member said so).
    pub(super) fn log_removed(&mut self) {
        if self.removed_logged || self.node.role() != RoleKind::Removed {
            return;
        }
        self.removed_logged = true;
        let (membership, from) = self.node.replica().membership_latest();
        tracing::warn!(node = %self.handle.id, newest = %membership, from_slot = from.0,
            leader = ?self.node.leader().map(|l| l.0),
            "REMOVED: this replica is not a member of the cluster's membership any more; it \
             never campaigns and points clients at the leader. Stop it \
             (docs/runbooks/replace-machine.md)");
    }

    /// What this replica's refusals tell a dialer that is not a member (`MemberSet::view`).
    pub(super) fn update_view(&self) {
        let Some(set) = &self.member_set else {
            return;
        };
        let replica = self.node.replica();
        if replica.membership_guessed() || replica.removed_from().is_some() {
            set.set_view(None);
            return;
        }
        let (membership, from) = replica.membership_latest();
        set.set_view(Some(crate::node::peer::MembershipNotice {
            membership: membership.clone(),
            from_slot: from,
            leader: self.node.leader(),
        }));
    }

    /// A peer refused us as a non-member and told what it knows: if its newest membership is
    /// newer than ours and leaves us out, we were removed (`Node::removed`).
    pub(super) fn take_membership_notice(&mut self) {
        let Some((from, told)) = self
            .member_set
            .as_ref()
            .and_then(crate::node::peer::MemberSet::take_notice)
        else {
            return;
        };
        let me = self.handle.id;
        if told.membership.is_member(me) {
            return;
        }
        let before = self.node.replica().removed_from();
        self.node
            .removed(self.clock.now(), told.from_slot, told.leader);
        if !self.node.replica().is_removed() {
            return;
        }
        // Reach the leader it named: client hints point there.
        if let Some(dialer) = &self.dialer {
            for address in &told.membership.addresses {
                let endpoint = dialer.endpoint(address);
                self.handle
                    .endpoints
                    .write()
                    .expect("endpoints poisoned")
                    .insert(address.id, endpoint);
            }
        }
        if let (None, Some(from_slot)) = (before, self.node.replica().removed_from()) {
            tracing::info!(node = %me, told_by = %from, membership = %told.membership,
                from_slot = from_slot.0,
                "a member says a newer membership leaves this replica out");
        }
        self.log_removed();
        self.update_view();
    }
}
