//! Ring hops shared by METP's attention and MLP programs: a forward hop that carries data to
//! the next step, and a hop that also carries an fp32 accumulator back to its owner.

use super::{Device, Dtype, Mat, Pending, Tag, Tracked};
use crate::error::Result;

/// Where one traveling stream of a ring is received: its tag, the name its receive buffer is
/// counted under, and the shapes of its parts.
pub(crate) struct Hop<'a> {
    /// Message tag.
    pub tag: Tag,
    /// Buffer name for the byte count.
    pub name: &'static str,
    /// Shapes of the parts.
    pub shapes: &'a [(usize, usize, Dtype)],
}

/// One hop of a forward ring: take the next step's data from its posted receive, or — with a
/// single receive buffer, where nothing was posted — release the current block and receive.
pub(crate) fn data_hop(
    dev: &mut Device,
    prev: usize,
    data: &mut Option<Vec<Tracked<Mat>>>,
    pending: Option<Pending>,
    hop: &Hop<'_>,
) -> Result<()> {
    let got = match pending {
        Some(pd) => dev.wait(pd)?,
        None => {
            drop(data.take());
            dev.recv(prev, hop.tag, hop.name, hop.shapes)?
        }
    };
    *data = Some(got);
    Ok(())
}

/// One hop of a ring that carries data forward and an fp32 accumulator back to its owner (the
/// backward K/V ring, the backward MLP weight ring): send this step's accumulator to `next`;
/// with one receive buffer, release the data and accumulator first; then take the next step's
/// data (unless this was the last step) and the incoming accumulator, from their posted
/// receives if any.
#[allow(clippy::too_many_arguments)]
pub(crate) fn accumulator_hop(
    dev: &mut Device,
    next: usize,
    prev: usize,
    last: bool,
    single_buffer: bool,
    data: &mut Option<Vec<Tracked<Mat>>>,
    acc: &mut Vec<Tracked<Mat>>,
    next_data: Option<Pending>,
    next_acc: Option<Pending>,
    data_hop: &Hop<'_>,
    acc_hop: &Hop<'_>,
) -> Result<()> {
    let parts = acc.iter().map(|m| (m.clone_owned(), Dtype::Fp32)).collect();
    dev.send(next, acc_hop.tag, parts)?;
    if single_buffer {
        drop(data.take());
        acc.clear();
    }
    if !last {
        let d = match next_data {
            Some(pd) => dev.wait(pd)?,
            None => dev.recv(prev, data_hop.tag, data_hop.name, data_hop.shapes)?,
        };
        *data = Some(d);
    }
    let a = match next_acc {
        Some(pd) => dev.wait(pd)?,
        None => dev.recv(prev, acc_hop.tag, acc_hop.name, acc_hop.shapes)?,
    };
    if last {
        *data = None;
    }
    *acc = a;
    Ok(())
}
