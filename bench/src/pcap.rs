//! `count-pcap`: the messages of a capture, counted by who sent them to whom
//! (`scripts/bench-rtt`, docs/PERFORMANCE.md, "Round trips per operation").
//!
//! Reads a classic pcap file (what `dumpcap -P` writes; Ethernet, Linux cooked v1/v2, raw IP or
//! BSD loopback framing; IPv4 or IPv6 without extension headers) and counts the TCP segments
//! that carry payload, by the listening ports involved:
//!
//! - `to_server`: the destination is a client port (a request, or anything else a client sends);
//! - `to_client`: the source is a client port (an answer, a grant pushed on a stream, ...);
//! - `peer`: a peer port on either end (replica to replica, either way);
//! - `other`: none of the given ports (not what the capture filter was for).
//!
//! Segments without payload (the handshake, pure acknowledgements, FIN) are not messages and are
//! left out. A segment is what the wire carries: a sender that writes two messages at once sends
//! one segment, and a large message may be several; on a LAN it is the segments that pay the
//! latency, so they are what is counted. Only the headers are read, so a capture may be cut
//! short per packet (`-s 128`): lengths come from the IP header, not from the captured bytes.
//!
//! stdout: `segments <to_server> <to_client> <peer> <other> <client_bytes> <peer_bytes>`.

use crate::Args;

/// One TCP segment with payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub src_port: u16,
    pub dst_port: u16,
    pub payload: u32,
}

/// Segments by class (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub to_server: u64,
    pub to_client: u64,
    pub peer: u64,
    pub other: u64,
    pub client_bytes: u64,
    pub peer_bytes: u64,
}

const LINKTYPE_NULL: u32 = 0;
const LINKTYPE_ETHERNET: u32 = 1;
const LINKTYPE_RAW: u32 = 101;
const LINKTYPE_LINUX_SLL: u32 = 113;
const LINKTYPE_LINUX_SLL2: u32 = 276;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_TCP: u8 = 6;

fn u16_be(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_in(b: &[u8], at: usize, big_endian: bool) -> Option<u32> {
    let raw: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(if big_endian {
        u32::from_be_bytes(raw)
    } else {
        u32::from_le_bytes(raw)
    })
}

/// The TCP segments with payload in a classic pcap file, in capture order. Packets that are not
/// TCP over IPv4/IPv6 are skipped; a file that is not pcap, or is cut inside a record header, is
/// an error (a record cut short at the file's end is too: the capture was not stopped cleanly).
pub fn segments(file: &[u8]) -> Result<Vec<Segment>, String> {
    let magic = file
        .get(..4)
        .ok_or("not a pcap file: shorter than its magic")?;
    let big_endian = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => false,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => true,
        [0x0a, 0x0d, 0x0d, 0x0a] => {
            return Err("a pcapng file: capture with `dumpcap -P` (classic pcap)".into())
        }
        _ => return Err(format!("not a pcap file: magic {magic:02x?}")),
    };
    let linktype = u32_in(file, 20, big_endian).ok_or("pcap header cut short")?;
    let mut out = Vec::new();
    let mut at = 24;
    while at < file.len() {
        let incl = u32_in(file, at + 8, big_endian).ok_or("record header cut short")? as usize;
        let data = file
            .get(at + 16..at + 16 + incl)
            .ok_or("record cut short (was the capture stopped cleanly?)")?;
        at += 16 + incl;
        if let Some(segment) = packet(data, linktype, big_endian) {
            out.push(segment);
        }
    }
    Ok(out)
}

/// The TCP segment with payload in one captured packet, if it is one.
fn packet(data: &[u8], linktype: u32, big_endian: bool) -> Option<Segment> {
    let (ethertype, ip) = match linktype {
        LINKTYPE_ETHERNET => (u16_be(data, 12)?, 14),
        LINKTYPE_LINUX_SLL => (u16_be(data, 14)?, 16),
        LINKTYPE_LINUX_SLL2 => (u16_be(data, 0)?, 20),
        LINKTYPE_RAW => match data.first()? >> 4 {
            4 => (ETHERTYPE_IPV4, 0),
            6 => (ETHERTYPE_IPV6, 0),
            _ => return None,
        },
        // The address family, in the capturing host's byte order: 2 is AF_INET; the several
        // values of AF_INET6 (24, 28, 30) are told by the IP version nibble instead.
        LINKTYPE_NULL => match u32_in(data, 0, big_endian)? {
            2 => (ETHERTYPE_IPV4, 4),
            _ if data.get(4)? >> 4 == 6 => (ETHERTYPE_IPV6, 4),
            _ => return None,
        },
        _ => return None,
    };
    let (tcp, ip_payload) = match ethertype {
        ETHERTYPE_IPV4 => {
            let header = usize::from(data.get(ip)? & 0x0f) * 4;
            if *data.get(ip + 9)? != IPPROTO_TCP || header < 20 {
                return None;
            }
            let total = usize::from(u16_be(data, ip + 2)?);
            (ip + header, total.checked_sub(header)?)
        }
        ETHERTYPE_IPV6 => {
            if *data.get(ip + 6)? != IPPROTO_TCP {
                return None;
            }
            (ip + 40, usize::from(u16_be(data, ip + 4)?))
        }
        _ => return None,
    };
    let tcp_header = usize::from(data.get(tcp + 12)? >> 4) * 4;
    let payload = ip_payload.checked_sub(tcp_header)?;
    if payload == 0 {
        return None;
    }
    Some(Segment {
        src_port: u16_be(data, tcp)?,
        dst_port: u16_be(data, tcp + 2)?,
        payload: payload as u32,
    })
}

/// `segments` by class, given the client ports and the peer ports the servers listen on.
pub fn count(segments: &[Segment], client_ports: &[u16], peer_ports: &[u16]) -> Counts {
    let mut c = Counts::default();
    for s in segments {
        let bytes = u64::from(s.payload);
        if client_ports.contains(&s.dst_port) {
            c.to_server += 1;
            c.client_bytes += bytes;
        } else if client_ports.contains(&s.src_port) {
            c.to_client += 1;
            c.client_bytes += bytes;
        } else if peer_ports.contains(&s.src_port) || peer_ports.contains(&s.dst_port) {
            c.peer += 1;
            c.peer_bytes += bytes;
        } else {
            c.other += 1;
        }
    }
    c
}

/// `--workload count-pcap`: counts `--pcap` by `--client-ports` and `--peer-ports`.
pub fn run(args: &Args) -> i32 {
    let Some(path) = &args.pcap else {
        eprintln!("picket-bench: count-pcap needs --pcap FILE");
        return 64;
    };
    let file = match std::fs::read(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("picket-bench: read {}: {e}", path.display());
            return 1;
        }
    };
    match segments(&file) {
        Ok(segments) => {
            let c = count(&segments, &args.client_ports, &args.peer_ports);
            println!(
                "segments {} {} {} {} {} {}",
                c.to_server, c.to_client, c.peer, c.other, c.client_bytes, c.peer_bytes
            );
            0
        }
        Err(e) => {
            eprintln!("picket-bench: {}: {e}", path.display());
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 + TCP packet (20-byte IP header, `tcp_words` x 4-byte TCP header) with `payload`
    /// bytes after the headers, of which only `captured` of the whole packet are kept.
    fn ipv4_tcp(src: u16, dst: u16, tcp_words: u8, payload: usize) -> Vec<u8> {
        let tcp_len = usize::from(tcp_words) * 4;
        let total = 20 + tcp_len + payload;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[9] = IPPROTO_TCP;
        p[20..22].copy_from_slice(&src.to_be_bytes());
        p[22..24].copy_from_slice(&dst.to_be_bytes());
        p[32] = tcp_words << 4;
        p
    }

    fn ethernet(ip: &[u8], ethertype: u16) -> Vec<u8> {
        let mut p = vec![0u8; 14];
        p[12..14].copy_from_slice(&ethertype.to_be_bytes());
        p.extend_from_slice(ip);
        p
    }

    /// A little-endian classic pcap of `packets`, each cut to `snaplen` bytes.
    fn pcap(linktype: u32, packets: &[Vec<u8>], snaplen: usize) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
        f.extend_from_slice(&2u16.to_le_bytes());
        f.extend_from_slice(&4u16.to_le_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&(snaplen as u32).to_le_bytes());
        f.extend_from_slice(&linktype.to_le_bytes());
        for (i, p) in packets.iter().enumerate() {
            let kept = p.len().min(snaplen);
            f.extend_from_slice(&(i as u32).to_le_bytes());
            f.extend_from_slice(&0u32.to_le_bytes());
            f.extend_from_slice(&(kept as u32).to_le_bytes());
            f.extend_from_slice(&(p.len() as u32).to_le_bytes());
            f.extend_from_slice(&p[..kept]);
        }
        f
    }

    #[test]
    fn counts_payload_segments_by_port_class_on_a_truncated_capture() {
        let packets = vec![
            // a request to client port 7401, its answer, a pure ack (no payload)
            ethernet(&ipv4_tcp(50000, 7401, 5, 300), ETHERTYPE_IPV4),
            ethernet(&ipv4_tcp(7401, 50000, 8, 1200), ETHERTYPE_IPV4),
            ethernet(&ipv4_tcp(50000, 7401, 8, 0), ETHERTYPE_IPV4),
            // replica traffic: to a peer port and back from it
            ethernet(&ipv4_tcp(40000, 7411, 5, 2048), ETHERTYPE_IPV4),
            ethernet(&ipv4_tcp(7411, 40000, 5, 40), ETHERTYPE_IPV4),
            // something else on the wire, and a non-IP frame
            ethernet(&ipv4_tcp(1234, 5678, 5, 10), ETHERTYPE_IPV4),
            ethernet(&[0u8; 40], 0x0806),
        ];
        let file = pcap(LINKTYPE_ETHERNET, &packets, 96);
        let segs = segments(&file).unwrap();
        assert_eq!(segs.len(), 5, "{segs:?}");
        assert_eq!(
            segs[1],
            Segment {
                src_port: 7401,
                dst_port: 50000,
                payload: 1200
            }
        );
        let c = count(&segs, &[7401, 7402], &[7411]);
        assert_eq!(
            c,
            Counts {
                to_server: 1,
                to_client: 1,
                peer: 2,
                other: 1,
                client_bytes: 1500,
                peer_bytes: 2088,
            }
        );
    }

    #[test]
    fn reads_cooked_raw_ipv6_and_big_endian_files() {
        // Linux cooked v1: the protocol at bytes 14..16.
        let mut sll = vec![0u8; 16];
        sll[14..16].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        sll.extend_from_slice(&ipv4_tcp(1, 2, 5, 7));
        assert_eq!(
            segments(&pcap(LINKTYPE_LINUX_SLL, &[sll], 128)).unwrap()[0].payload,
            7
        );
        // Raw IPv6: payload length counts the TCP header.
        let mut v6 = vec![0u8; 40 + 20 + 9];
        v6[0] = 0x60;
        v6[4..6].copy_from_slice(&29u16.to_be_bytes());
        v6[6] = IPPROTO_TCP;
        v6[40..42].copy_from_slice(&9u16.to_be_bytes());
        v6[52] = 5 << 4;
        let segs = segments(&pcap(LINKTYPE_RAW, &[v6], 128)).unwrap();
        assert_eq!(
            segs,
            vec![Segment {
                src_port: 9,
                dst_port: 0,
                payload: 9
            }]
        );
        // A big-endian file with the same packet as the first test's request.
        let mut be = pcap(
            LINKTYPE_ETHERNET,
            &[ethernet(&ipv4_tcp(50000, 7401, 5, 300), ETHERTYPE_IPV4)],
            128,
        );
        be[..4].copy_from_slice(&0xa1b2c3d4u32.to_be_bytes());
        be[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_be_bytes());
        be[24 + 8..24 + 12].reverse();
        assert_eq!(segments(&be).unwrap()[0].payload, 300);
    }

    #[test]
    fn refuses_pcapng_and_a_record_cut_short() {
        assert!(segments(&[0x0a, 0x0d, 0x0d, 0x0a, 0, 0])
            .unwrap_err()
            .contains("pcapng"));
        let mut file = pcap(
            LINKTYPE_ETHERNET,
            &[ethernet(&ipv4_tcp(1, 2, 5, 3), ETHERTYPE_IPV4)],
            128,
        );
        file.truncate(file.len() - 1);
        assert!(segments(&file).unwrap_err().contains("cut short"));
    }
}
