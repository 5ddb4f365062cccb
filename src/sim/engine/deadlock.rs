//! Deadlock diagnosis: which stream heads are stuck and what each one waits for.

use super::*;

impl<'g> Engine<'g> {
    fn describe(&self, t: u32) -> String {
        let task = &self.g.tasks[t as usize];
        format!(
            "task {t} ({} on device {} {})",
            label_name(&task.label, None),
            task.device,
            stream_name(task.stream)
        )
    }

    /// Why a task that has not started cannot start.
    fn blocked_on(&self, t: u32) -> String {
        let s = self.ts[t as usize].stream as usize;
        let head = self.stream_tasks[self.cursor[s] as usize];
        if head != t {
            return format!("is queued behind {} on its stream", self.describe(head));
        }
        let waiting: Vec<String> = self.g.tasks[t as usize]
            .deps
            .iter()
            .filter(|&&d| self.ts[d as usize].state != DONE)
            .take(3)
            .map(|&d| self.describe(d))
            .collect();
        format!("waits for {}", waiting.join(", "))
    }

    pub(super) fn deadlock_message(&self) -> String {
        const SHOWN: usize = 4;
        let mut stuck = Vec::new();
        let mut heads = 0;
        for s in 0..self.stream_key.len() {
            if self.cursor[s] >= self.stream_off[s + 1] {
                continue;
            }
            heads += 1;
            if stuck.len() == SHOWN {
                continue;
            }
            let h = self.stream_tasks[self.cursor[s] as usize];
            let task = &self.g.tasks[h as usize];
            let what = if self.ts[h as usize].state == STARTED {
                match &task.work {
                    Work::Send { to, tag, .. } => {
                        let p = self.ts[h as usize].peer;
                        format!(
                            "sends to device {to} (tag {tag}) and waits for its recv, {}, which {}",
                            self.describe(p),
                            self.blocked_on(p)
                        )
                    }
                    Work::Recv { from, tag, .. } => {
                        let p = self.ts[h as usize].peer;
                        format!(
                            "receives from device {from} (tag {tag}) and waits for its send, {}, which {}",
                            self.describe(p),
                            self.blocked_on(p)
                        )
                    }
                    Work::Collective { id, .. } => {
                        let c = &self.colls[self.ts[h as usize].peer as usize];
                        let missing: Vec<String> = c
                            .members
                            .clone()
                            .map(|k| self.coll_tasks[k as usize])
                            .filter(|&m| self.ts[m as usize].state == NOT_STARTED)
                            .take(2)
                            .map(|m| format!("{}, which {}", self.describe(m), self.blocked_on(m)))
                            .collect();
                        format!(
                            "waits for the other ranks of collective {id}: {}",
                            missing.join("; ")
                        )
                    }
                    _ => "started but never finished".to_string(),
                }
            } else {
                self.blocked_on(h)
            };
            stuck.push(format!("{} {what}", self.describe(h)));
        }
        format!(
            "{} of {} tasks never finished (stopped at {:.3} µs); {heads} stream(s) stuck, e.g.: {}",
            self.g.tasks.len() - self.done,
            self.g.tasks.len(),
            ps_to_secs(self.now) * 1e6,
            stuck.join("; ")
        )
    }
}
